"""The synthetic web's generation: determinism, link forms, structure, content."""

from __future__ import annotations

import collections
import zlib

import lxml.html
import pytest

from larbin_py.sim import CrawlRules, SimConfig, SimWeb, canonical, compute_truth, resolve
from larbin_py.sim.urls import UNRESERVED, split_url
from larbin_py.sim.trap import trap_layer, trap_page

PORT = 8080


@pytest.fixture(scope="module")
def web() -> SimWeb:
    return SimWeb.generate(SimConfig(hosts=60, seed=7), PORT)


def _signature(w: SimWeb):
    return [(h.name, h.ip, h.gzip, h.chunked, h.robots.kind, h.robots.body,
             sorted((pq, r.status, r.body, r.links) for pq, r in h.resources.items()))
            for h in w.hosts.values()]


def test_same_seed_same_web_and_truth():
    a = SimWeb.generate(SimConfig(hosts=40, seed=3), PORT)
    b = SimWeb.generate(SimConfig(hosts=40, seed=3), PORT)
    assert _signature(a) == _signature(b)
    rules = CrawlRules(depth_in_site=a.max_depth())
    ta, tb = compute_truth(a, rules), compute_truth(b, rules)
    assert ta.must_request == tb.must_request and ta.saved == tb.saved
    assert ta.expected_reason == tb.expected_reason


def test_different_seed_different_web():
    a = SimWeb.generate(SimConfig(hosts=40, seed=3), PORT)
    b = SimWeb.generate(SimConfig(hosts=40, seed=4), PORT)
    assert _signature(a) != _signature(b)
    assert a.hosts["h0.sim.test"].resources["/"].body != b.hosts["h0.sim.test"].resources["/"].body


def test_a_web_of_300_hosts_is_generated_whole():
    """Its speed: bench/sim.py."""
    w = SimWeb.generate(SimConfig(hosts=300, seed=11), PORT)
    assert len(w.hosts) >= 300 and w.page_count() > 300 * 3
    assert all(h.resources.get("/") is not None for h in w.hosts.values() if h.name not in w.dead_hosts)


# -- the oracle resolver itself, on hand-checked cases -----------------------

BASE = "http://h1.sim.test:8080/docs/sub/page.html"


@pytest.mark.parametrize("href,expected", [
    ("p1.html", "http://h1.sim.test:8080/docs/sub/p1.html"),
    ("./p1.html", "http://h1.sim.test:8080/docs/sub/p1.html"),
    ("../p1.html", "http://h1.sim.test:8080/docs/p1.html"),
    ("../../../../p1.html", "http://h1.sim.test:8080/p1.html"),
    ("/p1.html", "http://h1.sim.test:8080/p1.html"),
    ("./", "http://h1.sim.test:8080/docs/sub/"),
    ("//H2.Sim.TEST:8080/x.html#frag", "http://h2.sim.test:8080/x.html"),
    ("HTTP://h2.sim.test:80/", "http://h2.sim.test/"),
    ("http://h2.sim.test", "http://h2.sim.test/"),
    ("  \n/%7eann/p.html\t ", "http://h1.sim.test:8080/~ann/p.html"),
    ("/%7Eann/p.html", "http://h1.sim.test:8080/~ann/p.html"),
    ("/x%2fy.html", "http://h1.sim.test:8080/x%2Fy.html"),
    ("/caf\u00e9.html", "http://h1.sim.test:8080/caf%C3%A9.html"),
    ("/caf%c3%a9.html", "http://h1.sim.test:8080/caf%C3%A9.html"),
    ("/My Doc.html", "http://h1.sim.test:8080/My%20Doc.html"),
    ("/%41%2D%5f.html", "http://h1.sim.test:8080/A-_.html"),
    ("item.php?id=3&cat=2#x", "http://h1.sim.test:8080/docs/sub/item.php?id=3&cat=2"),
    ("http://b\u00fccher.sim.test:8080/", "http://xn--bcher-kva.sim.test:8080/"),
    ("http://B\u00dcCHER.sim.test:8080/", "http://xn--bcher-kva.sim.test:8080/"),
    ("#top", "http://h1.sim.test:8080/docs/sub/page.html"),
    ("mailto:a@h1.sim.test", None),
    ("javascript:void(0)", None),
    ("JavaScript:alert(1)", None),
    ("data:text/html,<b>x</b>", None),
    ("ftp://h1.sim.test/pub/", None),
    ("tel:+15550100", None),
    ("https://h1.sim.test/", None),
])
def test_resolver_on_hand_checked_cases(href, expected):
    assert resolve(BASE, href) == expected


def test_canonical_urls_are_canonical(web):
    for url in web.all_urls():
        assert canonical(url) == url
        host, port, pq = split_url(url)
        assert host == host.lower() and host.isascii()
        assert port == PORT
        path = pq.split("?", 1)[0]
        i = 0
        while i < len(path):
            ch = path[i]
            if ch == "%":
                esc = path[i + 1:i + 3]
                assert esc == esc.upper() and chr(int(esc, 16)) not in UNRESERVED, url
                i += 3
                continue
            assert ch in UNRESERVED or ch == "/", url
            i += 1


def test_port_80_is_implicit_and_sometimes_written():
    w = SimWeb.generate(SimConfig(hosts=30, seed=5), 80)
    assert all(":" not in split_url(u)[0] and "://" in u and u.count(":") == 1 for u in w.all_urls())
    raws = [lk.raw for h in w.hosts.values() for r in h.resources.values() for lk in r.links]
    assert any(":80/" in raw for raw in raws)
    for h in w.hosts.values():
        for r in h.resources.values():
            for lk in r.links:
                if lk.kind != "redirect":
                    assert resolve(lk.base, lk.raw) == lk.target


# -- links: every form, as written in the HTML ---------------------------------

def _extract(body: bytes, encoding: str | None):
    parser = lxml.html.HTMLParser(encoding=encoding) if encoding else None
    doc = lxml.html.document_fromstring(body, parser=parser)
    found = []
    base = None
    for el in doc.iter():
        tag = el.tag if isinstance(el.tag, str) else ""
        if tag == "base" and base is None:
            base = el.get("href")
        elif tag == "a" and el.get("href") is not None:
            found.append(("a", el.get("href"), "nofollow" in (el.get("rel") or "")))
        elif tag == "area" and el.get("href") is not None:
            found.append(("area", el.get("href"), False))
        elif tag in ("frame", "iframe") and el.get("src") is not None:
            found.append((tag, el.get("src"), False))
        elif tag == "img" and el.get("src") is not None:
            found.append(("img", el.get("src"), False))
        elif tag == "link" and el.get("rel") == "next":
            found.append(("link", el.get("href"), False))
        elif tag == "meta" and (el.get("http-equiv") or "").lower() == "refresh":
            found.append(("refresh", el.get("content").split("url=", 1)[1], False))
    return found, base


def test_html_carries_exactly_the_recorded_links(web):
    checked = 0
    for h in web.hosts.values():
        for pq, res in h.resources.items():
            if not res.is_html:
                continue
            enc = res.content_type.partition("charset=")[2] or None
            found, base = _extract(res.body, enc)
            want = [(lk.kind, lk.raw, lk.nofollow) for lk in res.links]
            assert collections.Counter(found) == collections.Counter(want), (h.name, pq)
            page_url = web.url(h.name, pq)
            expect_base = resolve(page_url, base) if base is not None else page_url
            for lk in res.links:
                assert lk.base == expect_base
            checked += 1
    assert checked > 200


def test_every_link_form_resolves_to_its_target(web):
    forms = collections.Counter()
    for h in web.hosts.values():
        for res in h.resources.values():
            for lk in res.links:
                if lk.kind == "redirect":
                    continue
                assert resolve(lk.base, lk.raw) == lk.target, lk
                raw = lk.raw.strip()
                if lk.target is None:
                    forms["unfollowable"] += 1
                elif raw.lower().startswith("http://"):
                    forms["absolute"] += 1
                elif raw.startswith("//"):
                    forms["protocol-relative"] += 1
                elif raw.startswith("/"):
                    forms["root-relative"] += 1
                elif raw.startswith("../"):
                    forms["dotdot"] += 1
                elif raw.startswith("./"):
                    forms["dot"] += 1
                else:
                    forms["relative"] += 1
                for feature, present in (("fragment", "#" in raw), ("%7e", "%7e" in raw.lower()),
                                         ("lowerhex", "%2f" in raw or "%c3" in raw),
                                         ("raw-utf8", "é" in raw), ("space-around", raw != lk.raw),
                                         ("upper-host", "SIM.TEST" in raw or "sIm" in raw),
                                         ("idn", "bücher" in raw.lower()), ("query&", "&" in raw)):
                    forms[feature] += present
                forms["kind:" + lk.kind] += 1
                forms["nofollow"] += lk.nofollow
    for name in ("unfollowable", "absolute", "protocol-relative", "root-relative", "dotdot", "dot",
                 "relative", "fragment", "%7e", "lowerhex", "raw-utf8", "space-around",
                 "upper-host", "idn", "query&", "kind:a", "kind:area", "kind:frame",
                 "kind:iframe", "kind:link", "kind:refresh", "kind:img", "nofollow"):
        assert forms[name] > 0, (name, forms)
    html_pages = [r for h in web.hosts.values() for r in h.resources.values() if r.is_html]
    assert any(b"<base href=" in r.body for r in html_pages)
    assert any(b"&amp;" in r.body for r in html_pages)


# -- structure ----------------------------------------------------------------

def test_hosts_ips_and_dns(web):
    names = set(web.hosts)
    assert {"h0.sim.test", "h59.sim.test", "www.h3.sim.test", "blog.h3.sim.test",
            "xn--bcher-kva.sim.test", "alias.sim.test", "trap.sim.test"} <= names
    assert web.hosts["xn--bcher-kva.sim.test"].display == "bücher.sim.test"
    per_ip = collections.Counter(h.ip for h in web.hosts.values() if h.name.startswith("h"))
    assert max(per_ip.values()) == 4 and "127.0.1.1" in per_ip
    assert all(ip.startswith("127.") for ip in web.ips())
    recs, cnames = web.dns_records(), web.dns_cnames()
    assert cnames["alias.sim.test"] == "h5.sim.test"
    assert cnames["cdn.sim.test"] == "edge.sim.test" and cnames["edge.sim.test"] == "h1.sim.test"
    assert "alias.sim.test" not in recs and recs["h5.sim.test"] == [web.hosts["alias.sim.test"].ip]
    assert web.hosts["cdn.sim.test"].ip == web.hosts["h1.sim.test"].ip


def test_layers_make_depth_order_independent(web):
    """Same-host followable links go layer k -> k+1, to '/', or to the page itself."""
    for h in web.hosts.values():
        if h.trap:
            continue
        assert "/" in h.resources and h.resources["/"].layer == 0
        for pq, res in h.resources.items():
            if not res.is_html:
                continue
            for lk in res.links:
                if lk.target is None or lk.nofollow:
                    continue
                th, _, tpq = split_url(lk.target)
                if th != h.name:
                    assert tpq == "/", lk
                    continue
                if tpq in ("/", pq):
                    continue
                target = h.resources.get(tpq)
                if target is None:  # a missing page: 404
                    assert tpq.startswith("/missing")
                    continue
                want = res.layer if res.kind == "redirect" else res.layer + 1
                assert target.layer == want, (h.name, pq, tpq)
    assert web.max_depth() >= 2


def test_content_types_charsets_and_binary_bodies(web):
    kinds = collections.Counter()
    for h in web.hosts.values():
        kinds["gzip"] += h.gzip
        kinds["chunked"] += h.chunked
        for res in h.resources.values():
            if res.content_type == "image/png":
                assert res.body.startswith(b"\x89PNG\r\n\x1a\n")
                n = int.from_bytes(res.body[33:37], "big")
                assert res.body[37:41] == b"IDAT" and len(zlib.decompress(res.body[41:41 + n])) == 52
                kinds["png"] += 1
            elif res.content_type == "image/jpeg":
                assert res.body.startswith(b"\xff\xd8") and res.body.endswith(b"\xff\xd9")
                kinds["jpg"] += 1
            elif res.content_type == "application/pdf":
                assert res.body.startswith(b"%PDF-")
                kinds["pdf"] += 1
            elif res.is_html:
                declared = res.content_type.partition("charset=")[2]
                if not declared:
                    meta = res.body.split(b'<meta charset="', 1)[1].split(b'"', 1)[0].decode()
                    declared = meta
                    kinds["meta-charset"] += 1
                text = res.body.decode(declared)
                if declared != "utf-8":
                    kinds[declared] += 1
                    with pytest.raises(UnicodeDecodeError):
                        res.body.decode("utf-8")
                    assert any(ch in text for ch in "éü日")
                if b"&copy entity" in res.body:
                    kinds["malformed"] += 1
    for name in ("gzip", "chunked", "png", "jpg", "pdf", "meta-charset", "iso-8859-1",
                 "windows-1252", "shift_jis", "malformed"):
        assert kinds[name] > 0, (name, kinds)


def test_redirects_duplicates_nofollow_only_pages(web):
    seen = collections.Counter()
    linked_normally = set()
    nofollow_targets = set()
    for h in web.hosts.values():
        for res in h.resources.values():
            for lk in res.links:
                (nofollow_targets if lk.nofollow else linked_normally).add(lk.target)
    for h in web.hosts.values():
        for pq, res in h.resources.items():
            url = web.url(h.name, pq)
            if res.kind == "redirect":
                assert res.status in (301, 302, 307) and res.location
                assert resolve(url, res.location) == res.links[0].target
                seen["redirect"] += 1
                if pq.startswith("/loop/"):
                    nxt = web.lookup(res.links[0].target)
                    assert web.lookup(nxt.links[0].target) is res
                    seen["loop"] += 1
            if pq.startswith("/dup/a"):
                twin = h.resources["/mirror/" + pq[len("/dup/"):]]
                assert twin.body == res.body
                assert [(x.target, x.raw) for x in twin.links] == [(x.target, x.raw) for x in res.links]
                assert all(lk.raw.startswith(("http://", "HTTP://", "Http://")) for lk in res.links)
                seen["dup"] += 1
            if pq.startswith("/private/"):
                assert url in nofollow_targets and url not in linked_normally
                seen["nofollow-only"] += 1
    assert nofollow_targets & linked_normally  # nofollow links to pages also linked normally
    for name in ("redirect", "loop", "dup", "nofollow-only"):
        assert seen[name] > 0, seen


def test_spider_trap_is_endless_and_layered(web):
    trap = web.hosts["trap.sim.test"]
    page = web.lookup(web.url(trap.name, "/cal/2026/11/"))
    assert trap_layer("/cal/2026/11/") == 1
    url = web.url(trap.name, "/cal/2026/11/")
    for _ in range(30):  # walk forward 30 months: always one more
        nxt = [lk for lk in page.links if lk.target > url and "/cal/" in lk.target]
        assert nxt and resolve(url, nxt[0].raw) == nxt[0].target
        url = nxt[0].target
        page = web.lookup(url)
        assert page is not None and page.is_html
    assert url.endswith("/cal/2029/05/") and trap_layer("/cal/2029/05/") == 31
    assert trap_page(trap, web.port, "/cal/2026/13/") is None
    assert web.lookup(web.url(trap.name, "/cal/x/")) is None


def test_robots_profiles_mix_and_all_absent():
    w = SimWeb.generate(SimConfig(hosts=200, seed=2), PORT)
    kinds = collections.Counter(h.robots.kind for h in w.hosts.values() if not h.trap)
    assert set(kinds) == {"absent", "rules", "patterns", "allow", "delay", "agent", "error",
                          "timeout", "redirect", "oversized", "forbidden"}, kinds
    for h in w.hosts.values():
        p = h.robots
        if p.kind == "oversized":
            assert len(p.body) > 500 * 1024 and b"Disallow: /\n" not in p.body[:500 * 1024]
            assert p.body.rstrip().endswith(b"Disallow: /")
        if p.kind == "delay":
            assert 0.3 <= p.crawl_delay <= 0.5 and b"Crawl-delay" in p.body
        if p.kind == "patterns":
            assert b"*" in p.body and b"$" in p.body
        if p.kind == "allow":
            assert b"Allow:" in p.body
    none = SimWeb.generate(SimConfig(hosts=50, seed=2, robots_mix={"absent": 1}), PORT)
    assert {h.robots.kind for h in none.hosts.values()} == {"absent"}


def test_documentation_pages_are_deep_trees_with_exactly_their_links():
    """Issue 37's pages (``doc_pages``): 40-100 kB, 100-300 links, the links in nested
    lists and sections about 24 elements deep; the HTML still carries exactly the
    links recorded for the truth."""
    cfg = SimConfig(seed=37, hosts=2, pages_per_host=(12, 12), body_size=(40_000, 100_000),
                    links_per_page=(100, 300), max_layer=6, doc_pages=True, extras=False, trap=False)
    web = SimWeb.generate(cfg, PORT)

    def depth(el) -> int:
        return 1 + max((depth(c) for c in el), default=0)

    big = 0
    for h in web.hosts.values():
        for pq, res in h.resources.items():
            if not res.is_html:
                continue
            enc = res.content_type.partition("charset=")[2] or None
            found, _base = _extract(res.body, enc)
            want = [(lk.kind, lk.raw, lk.nofollow) for lk in res.links]
            assert collections.Counter(found) == collections.Counter(want), (h.name, pq)
            if len(res.body) >= 40_000:
                big += 1
                assert 100 <= len(res.links) <= 330 and len(res.body) <= 130_000
                assert depth(lxml.html.fromstring(res.body)) >= 15
                assert res.body.count(b"<ul>") >= 3 and b'class="section"' in res.body
    assert big >= 12
    # the same config without doc_pages: the same links, flat pages
    flat = SimWeb.generate(SimConfig(**{**cfg.__dict__, "doc_pages": False}), PORT)
    assert [r.links for h in flat.hosts.values() for r in h.resources.values()] == \
        [r.links for h in web.hosts.values() for r in h.resources.values()]
