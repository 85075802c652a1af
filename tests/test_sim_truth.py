"""Ground truth: a hand-checked tiny web, robots rules, and a reference crawl."""

from __future__ import annotations

import asyncio
import gzip
from collections import deque

import lxml.html
import pytest

from larbin_py.sim import (CrawlRules, Fault, FaultPlan, Host, Link, Resource, RobotsProfile,
                           Rules, Sim, SimConfig, SimWeb, compute_truth, resolve)
from larbin_py.sim.client import Client
from larbin_py.sim.urls import split_url
from larbin_py.sim.trap import trap_layer

P = 8080


def U(host: str, pq: str, port: int = P) -> str:
    return f"http://{host}.sim.test:{port}{pq}"


def _page(links: list[Link], text: str = "") -> Resource:
    """An HTML page whose markup carries exactly ``links``."""
    tags = []
    for lk in links:
        if lk.kind == "img":
            tags.append(f'<img src="{lk.raw}">')
        else:
            rel = ' rel="nofollow"' if lk.nofollow else ""
            tags.append(f'<a{rel} href="{lk.raw}">x</a>')
    html = f"<html><body><p>{text}</p>{''.join(tags)}</body></html>"
    return Resource(200, "text/html; charset=utf-8", html.encode(), tuple(links))


def _a(base: str, target: str, *, kind: str = "a", nofollow: bool = False) -> Link:
    return Link(target, kind, target, base, nofollow)


def tiny_web(port: int = P) -> SimWeb:
    """a: a chain / -> x -> y -> z plus assorted links; b: robots /secret/; c: robots 503."""
    a, b, c = U("a", "/", port), U("b", "/", port), U("c", "/", port)
    ha = Host("a.sim.test", "127.0.1.1")
    ha.resources = {
        "/": _page([_a(a, U("a", "/x.html", port)), _a(a, U("a", "/img/p.png", port), kind="img"),
                    _a(a, U("a", "/doc.pdf", port)), _a(a, b), _a(a, U("a", "/private.html", port), nofollow=True),
                    _a(a, U("a", "/old.html", port)), _a(a, U("a", "/shop?id=1", port)),
                    _a(a, U("a", "/missing.html", port)), Link(None, "a", "mailto:x@a.sim.test", a),
                    _a(a, U("a", "/d1.html", port)), _a(a, U("a", "/d2.html", port))]),
        "/x.html": _page([_a(U("a", "/x.html", port), U("a", "/y.html", port))]),
        "/y.html": _page([_a(U("a", "/y.html", port), U("a", "/z.html", port))]),
        "/z.html": _page([], "z"),
        "/img/p.png": Resource(200, "image/png", b"\x89PNG fake", kind="image"),
        "/doc.pdf": Resource(200, "application/pdf", b"%PDF-1.4 fake", kind="pdf"),
        "/private.html": _page([], "private"),
        "/old.html": Resource(301, body=b"moved", location="/new.html", kind="redirect",
                              links=(_a(U("a", "/old.html", port), U("a", "/new.html", port), kind="redirect"),)),
        "/new.html": _page([], "new"),
        "/shop?id=1": _page([], "shop"),
        "/d1.html": _page([], "same bytes"),
        "/d2.html": _page([], "same bytes"),
    }
    hb = Host("b.sim.test", "127.0.1.2")
    hb.resources = {"/": _page([_a(b, U("b", "/secret/s.html", port)), _a(b, U("b", "/ok.html", port)), _a(b, c)]),
                    "/secret/s.html": _page([], "secret"), "/ok.html": _page([], "ok")}
    hb.robots = RobotsProfile("rules", 200, b"User-agent: *\nDisallow: /secret/\n")
    hc = Host("c.sim.test", "127.0.1.3")
    hc.resources = {"/": _page([])}
    hc.robots = RobotsProfile("error", 503, b"busy")
    return SimWeb([ha, hb, hc], port, seeds=[a])


def test_tiny_web_truth_by_hand():
    t = compute_truth(tiny_web(), CrawlRules(depth_in_site=2))
    assert t.must_request == {U("a", p) for p in ("/", "/x.html", "/y.html", "/doc.pdf", "/old.html",
                                                   "/new.html", "/shop?id=1", "/missing.html",
                                                   "/d1.html", "/d2.html")} | {U("b", "/"), U("b", "/ok.html")}
    assert set(t.saved) == {U("a", p) for p in ("/", "/x.html", "/y.html", "/new.html", "/shop?id=1",
                                                 "/d1.html", "/d2.html")} | {U("b", "/"), U("b", "/ok.html")}
    assert t.saved[U("a", "/new.html")] == b"<html><body><p>new</p></body></html>"
    assert t.expected_reason == {
        U("a", "/doc.pdf"): "badType", U("a", "/old.html"): "err30X", U("a", "/missing.html"): "err40X",
        U("a", "/z.html"): "tooDeep", U("b", "/secret/s.html"): "forbiddenRobots",
        U("c", "/"): "forbiddenRobots"}
    assert t.must_not_request == {U("a", "/z.html"), U("a", "/img/p.png"), U("a", "/private.html"),
                                  U("b", "/secret/s.html"), U("c", "/")}
    assert t.robots_hosts == {"a.sim.test", "b.sim.test", "c.sim.test"}
    assert t.robots_urls == {U(h, "/robots.txt") for h in "abc"}
    assert t.depth[U("b", "/ok.html")] == 1 and t.depth[U("a", "/new.html")] == 1
    assert t.duplicate_groups == []


def test_tiny_web_rule_variants():
    web = tiny_web()
    t = compute_truth(web, CrawlRules(depth_in_site=2, get_images=True, any_type=True))
    assert {U("a", "/img/p.png"), U("a", "/doc.pdf")} <= set(t.saved)
    assert U("a", "/doc.pdf") not in t.expected_reason
    t = compute_truth(web, CrawlRules(depth_in_site=2, get_cgi=False, forbidden_extensions=(".pdf",)))
    assert t.expected_reason[U("a", "/shop?id=1")] == "cgi"
    assert t.expected_reason[U("a", "/doc.pdf")] == "forbiddenExtension"
    assert not {U("a", "/shop?id=1"), U("a", "/doc.pdf")} & t.must_request
    t = compute_truth(web, CrawlRules(depth_in_site=2, no_external_links=True))
    assert t.expected_reason[U("b", "/")] == "outSite"
    assert all(split_url(u)[0] == "a.sim.test" for u in t.must_request)
    assert t.robots_hosts == {"a.sim.test"}
    t = compute_truth(web, CrawlRules(depth_in_site=2, limit_to_domain=("a.sim.test",)))
    assert U("b", "/") in t.must_not_request and t.expected_reason[U("b", "/")] == "outSite"
    t = compute_truth(web, CrawlRules(depth_in_site=2, depth_by_site=False))
    assert t.depth[U("b", "/")] == 1 and t.depth[U("b", "/ok.html")] == 0
    assert U("b", "/ok.html") in t.saved
    t = compute_truth(web, CrawlRules(depth_in_site=1, depth_by_site=False))
    assert t.expected_reason[U("b", "/ok.html")] == "tooDeep" and U("a", "/y.html") not in t.saved
    t = compute_truth(web, CrawlRules(depth_in_site=2, obey_robots=False))
    assert {U("b", "/secret/s.html"), U("c", "/")} <= t.must_request
    assert t.robots_hosts == set() and t.robots_urls == set()
    t = compute_truth(web, CrawlRules(depth_in_site=2, page_no_duplicate=True))
    assert t.duplicate_groups == [frozenset({U("a", "/d1.html"), U("a", "/d2.html")})]
    assert U("a", "/d1.html") not in t.saved and U("a", "/d1.html") in t.must_request
    t = compute_truth(web, CrawlRules(depth_in_site=2, follow_kinds=frozenset()))
    assert t.must_request == {U("a", "/")}


def test_permanent_faults_change_truth_and_transient_do_not():
    web = tiny_web()
    base = compute_truth(web, CrawlRules(depth_in_site=3))
    transient = FaultPlan([Fault("500", 0.9), Fault("reset", 0.9)], seed=1)
    t = compute_truth(web, CrawlRules(depth_in_site=3), transient)
    assert t.must_request == base.must_request and t.saved == base.saved
    plan = FaultPlan([Fault("404", 1.0, urls={U("a", "/x.html")}, transient=False),
                      Fault("stall", 1.0, urls={U("b", "/ok.html")}, transient=False),
                      Fault("503", 1.0, urls={U("b", "/robots.txt")}, transient=False)], seed=1)
    t = compute_truth(web, CrawlRules(depth_in_site=3), plan)
    assert t.expected_reason[U("a", "/x.html")] == "err40X"
    assert U("a", "/y.html") not in t.must_request  # only reachable through /x.html
    assert t.expected_reason[U("b", "/")] == "forbiddenRobots"  # robots 503 -> all disallowed
    assert U("b", "/ok.html") not in t.must_request
    plan = FaultPlan([Fault("stall", 1.0, urls={U("b", "/ok.html")}, transient=False)], seed=1)
    t = compute_truth(web, CrawlRules(depth_in_site=3), plan)
    assert t.expected_reason[U("b", "/ok.html")] == "timeout" and U("b", "/ok.html") in t.must_request
    assert U("b", "/ok.html") not in t.saved


# -- robots rules -----------------------------------------------------------------

@pytest.mark.parametrize("body,agent,path,allowed", [
    ("User-agent: *\nDisallow: /docs/\n", "larbin", "/docs/a.html", False),
    ("User-agent: *\nDisallow: /docs/\n", "larbin", "/doc.html", True),
    ("User-agent: *\nDisallow: /docs/\nAllow: /docs/ok\n", "larbin", "/docs/ok.html", True),
    ("User-agent: *\nDisallow: /a\nAllow: /a\n", "larbin", "/a", True),  # tie -> allow
    ("User-agent: *\nDisallow: /*.pdf$\n", "larbin", "/x/y.pdf", False),
    ("User-agent: *\nDisallow: /*.pdf$\n", "larbin", "/x/y.pdf?z", True),
    ("User-agent: *\nDisallow: /shop/*?id=\n", "larbin", "/shop/item.php?id=3", False),
    ("User-agent: *\nDisallow: /\nAllow: /$\n", "larbin", "/", True),
    ("User-agent: *\nDisallow: /\nAllow: /$\n", "larbin", "/p.html", False),
    ("User-agent: larbin\nDisallow: /news/\n\nUser-agent: *\nDisallow: /\n", "LARBIN", "/p.html", True),
    ("User-agent: larbin\nDisallow: /news/\n\nUser-agent: *\nDisallow: /\n", "other", "/p.html", False),
    ("User-agent: otherbot\nDisallow: /\n\nUser-agent: *\nDisallow: /x\n", "larbin", "/p", True),
    ("User-agent: *\nDisallow:\n", "larbin", "/p", True),
    ("User-agent: *\nDisallow: /\n", "larbin", "/robots.txt", True),
])
def test_robots_rules(body, agent, path, allowed):
    assert Rules.parse(body.encode()).allowed(agent, path) is allowed


def test_robots_only_first_500_kib_counts_and_crawl_delay():
    web = SimWeb.generate(SimConfig(hosts=200, seed=2), P)
    over = next(h for h in web.hosts.values() if h.robots.kind == "oversized")
    rules = Rules.parse(over.robots.body)
    assert rules.allowed("larbin", "/p1.html") and not rules.allowed("larbin", "/docs/p2.html")
    unpadded = b"\n".join(x for x in over.robots.body.split(b"\n") if not x.startswith(b"#"))
    assert not Rules.parse(unpadded).allowed("larbin", "/p1.html")  # the tail rule, if read
    delayed = next(h for h in web.hosts.values() if h.robots.kind == "delay")
    t = compute_truth(web, CrawlRules(depth_in_site=web.max_depth()))
    assert delayed.name in t.robots_hosts
    assert t.crawl_delay[delayed.name] == delayed.robots.crawl_delay


# -- properties on a generated web ----------------------------------------------------

def test_generated_truth_invariants():
    web = SimWeb.generate(SimConfig(hosts=80, seed=5), P)
    D = web.max_depth()
    t = compute_truth(web, CrawlRules(depth_in_site=D))
    assert not t.must_request & t.must_not_request
    assert set(t.saved) <= t.must_request
    assert len(t.saved) > 200
    reasons = set(t.expected_reason.values())
    assert {"forbiddenRobots", "err30X", "err40X", "badType", "tooDeep"} <= reasons
    rules_of = {h.name: h for h in web.hosts.values()}
    for url in t.must_request:
        host, _, pq = split_url(url)
        h = rules_of[host]
        assert not pq.startswith("/private/")  # nofollow-only pages
        if h.robots.kind in ("error", "timeout"):
            raise AssertionError(f"{url} requested on a host whose robots.txt fails")
        if h.robots.kind not in ("absent",):
            assert Rules.parse(h.robots.effective_body).allowed("larbin", pq), url
        if h.trap:
            assert trap_layer(pq) <= D
    trap = [u for u in t.must_request if u.startswith(f"http://trap.sim.test:{P}/cal/")]
    assert len(trap) == 2 * (D - 1) + 1
    too_deep = [u for u, r in t.expected_reason.items() if r == "tooDeep" and "trap" in u]
    assert len(too_deep) == 2 and all(trap_layer(split_url(u)[2]) == D + 1 for u in too_deep)
    # exact under any order: with the same rules the page depth is depth_in_site - layer
    for url in t.saved:
        host, _, pq = split_url(url)
        res = web.lookup(url)
        assert t.depth[url] == D - res.layer, url
    # a shallower crawl is a subset
    t2 = compute_truth(web, CrawlRules(depth_in_site=1))
    assert t2.must_request < t.must_request


# -- a reference crawl of the live sim must meet the truth exactly -----------------

_FOLLOW = {"a": "href", "area": "href", "frame": "src", "iframe": "src"}


def _links(body: bytes, ctype: str, url: str, get_images: bool):
    enc = ctype.partition("charset=")[2] or None
    doc = lxml.html.document_fromstring(body, parser=lxml.html.HTMLParser(encoding=enc)
                                        if enc else None)
    base = url
    for el in doc.iter("base"):
        if el.get("href"):
            base = resolve(url, el.get("href")) or url
        break
    out = []
    for el in doc.iter():
        tag = el.tag if isinstance(el.tag, str) else ""
        if tag in _FOLLOW and el.get(_FOLLOW[tag]) is not None:
            if tag == "a" and "nofollow" in (el.get("rel") or ""):
                continue
            out.append(el.get(_FOLLOW[tag]))
        elif tag == "img" and get_images and el.get("src") is not None:
            out.append(el.get("src"))
        elif tag == "link" and el.get("rel") == "next":
            out.append(el.get("href"))
        elif tag == "meta" and (el.get("http-equiv") or "").lower() == "refresh":
            out.append(el.get("content").split("url=", 1)[1])
    return [u for u in (resolve(base, h) for h in out) if u is not None]


async def _reference_crawl(sim: Sim, rules: CrawlRules):
    web, D = sim.web, rules.depth_in_site
    seen = {s: D for s in sim.seeds}
    queue = deque(sim.seeds)
    robots: dict[str, Rules] = {}
    clients: dict[str, Client] = {}
    requested, saved = set(), {}

    async def get(host, pq):
        h = web.hosts[host]
        c = clients.get(host)
        if c is None:
            c = clients[host] = await Client.connect(h.ip, sim.port)
        try:
            r = await asyncio.wait_for(c.get(host, pq, headers=(("Accept-Encoding", "gzip"),)), 0.5)
        except TimeoutError:
            del clients[host]
            await c.close()
            return None
        if r.headers.get("content-encoding") == "gzip":
            r.body = gzip.decompress(r.body)
        return r

    while queue:
        url = queue.popleft()
        d = seen[url]
        host, _, pq = split_url(url)
        path = pq.split("?", 1)[0].lower()
        if any(path.endswith(e) for e in rules.forbidden_extensions):
            continue
        if "?" in pq and not rules.get_cgi:
            continue
        if d < 0 or host not in web.hosts:
            continue
        if host not in robots:
            r, hops = await get(host, "/robots.txt"), 0
            while r is not None and r.status in (301, 302) and hops < 5:
                r, hops = await get(host, split_url(resolve(url, r.headers["location"]))[2]), hops + 1
            if r is None or r.status >= 500:
                robots[host] = Rules([], disallow_all=True)
            elif r.status >= 400:
                robots[host] = Rules([], allow_all=True)
            else:
                robots[host] = Rules.parse(r.body)
        if not robots[host].allowed(rules.user_agent, pq):
            continue
        r = await get(host, pq)
        requested.add(url)
        new: list[tuple[str, int]] = []
        if r is None:  # a stalled answer
            pass
        elif r.status in (301, 302, 307):
            new.append((resolve(url, r.headers["location"]), d))
        elif r.status == 200 and r.headers["content-type"].startswith("text/html"):
            saved[url] = r.body
            for target in _links(r.body, r.headers["content-type"], url, rules.get_images):
                other = split_url(target)[0] != host
                if other and rules.no_external_links:
                    continue
                new.append((target, D if other and rules.depth_by_site else d - 1))
        elif r.status == 200 and (rules.any_type or (
                rules.get_images and r.headers["content-type"].startswith("image/"))):
            saved[url] = r.body
        for target, nd in new:
            if target not in seen:
                seen[target] = nd
                queue.append(target)
    for c in clients.values():
        await c.close()
    return requested, saved


ALL_BUT_TIMEOUT = {k: 1.0 for k in ("absent", "rules", "patterns", "allow", "delay", "agent",
                                     "error", "redirect", "oversized", "forbidden")}


@pytest.mark.parametrize("rules_kw,faults", [
    ({}, []),
    ({"get_images": True, "any_type": True, "get_cgi": False, "forbidden_extensions": (".pdf",)}, []),
    ({"no_external_links": True}, []),
    ({"depth_in_site": 2}, [Fault("404", 0.1, transient=False), Fault("500", 0.05, transient=False),
                            Fault("stall", 0.02, transient=False)]),
])
@pytest.mark.async_timeout(60)
async def test_reference_crawl_of_live_sim_equals_truth(rules_kw, faults):
    """An independent naive crawler (lxml links, live HTTP) meets the truth exactly."""
    async with Sim(SimConfig(hosts=40, seed=8, robots_mix=ALL_BUT_TIMEOUT, faults=faults)) as sim:
        rules = CrawlRules(**{"depth_in_site": sim.web.max_depth(), **rules_kw})
        truth = sim.truth(rules)
        requested, saved = await _reference_crawl(sim, rules)
        assert requested == truth.must_request
        assert saved == truth.saved
        logged = {r.url for r in sim.log.requests if not r.target.startswith("/robots")}
        assert logged == truth.must_request
        assert not logged & truth.must_not_request
        robots_logged = {r.host for r in sim.log.requests if r.target == "/robots.txt"}
        assert robots_logged == truth.robots_hosts
        if faults:
            assert {"err40X", "err50X", "timeout"} <= set(truth.expected_reason.values())


@pytest.mark.async_timeout(30)
async def test_reference_crawl_of_live_hand_made_web():
    async with Sim(SimConfig(), build=tiny_web) as sim:
        assert sim.seeds == [U("a", "/", sim.port)]  # URLs carry the bound port
        rules = CrawlRules(depth_in_site=2)
        truth = sim.truth(rules)
        assert truth.must_request == {u.replace(f":{P}/", f":{sim.port}/")
                                      for u in compute_truth(tiny_web(), rules).must_request}
        requested, saved = await _reference_crawl(sim, rules)
        assert requested == truth.must_request and saved == truth.saved
        assert {r.host for r in sim.log.requests if r.target == "/robots.txt"} == truth.robots_hosts
