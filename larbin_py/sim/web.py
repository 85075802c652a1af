"""Deterministic generation of the synthetic web.

A :class:`SimWeb` is a set of :class:`Host` objects, each a dict of
:class:`Resource` (pre-rendered response) keyed by canonical ``path[?query]``.
:meth:`SimWeb.generate` builds one from a :class:`SimConfig`; the same config
(seed included) gives byte-identical pages, links and truth.  Webs can also be
built by hand (``SimWeb(hosts, port)``) for hand-checkable tests.

Shape of a generated host (what keeps ground truth exact under any crawl
order): pages sit on *layers*; ``/`` is layer 0; every page at layer k>0 is
linked from a page at layer k-1 (its tree parent) and followable links inside
a host only go from layer k to layer k+1 or back to ``/`` (plus self links).
Cross-host links always target another host's ``/``.  So every path from
``/`` to a page has exactly ``layer`` hops, and with ``depth_by_site`` a
page's depth is ``depth_in_site - layer`` whatever the crawl order.
Redirect targets are reachable only through their redirect and inherit its
layer; the spider trap is a line graph (unique simple paths).

Link forms (chosen per link from the page's seeded RNG, see :mod:`.links`): relative,
``./``, ``../``, root-relative, absolute, protocol-relative, fragments,
explicit port (``:80`` only when the port is 80), upper/mixed-case and
Unicode (IDN) host names, ``%7E``/``%7e`` for ``~``, lower-case hex escapes,
raw UTF-8 and raw spaces (UTF-8 pages), ``&amp;`` in queries, whitespace
around the value, ``<base href>``, and in the tags ``a``, ``area``,
``frame``, ``iframe``, ``link rel=next``, ``meta refresh`` and ``img``.
Every :class:`Link` records the exact attribute value (entities decoded) and
the base it resolves against, so tests can check it with
:func:`larbin_py.sim.urls.resolve`.
"""

from __future__ import annotations

import ipaddress
import random
import struct
import zlib
from dataclasses import dataclass, field
from html import escape

from .links import LinkWriter, relative, render_attr
from .model import ROBOTS_SIZE_LIMIT, Host, Link, Resource, RobotsProfile, base_url
from .scope import add_scope
from .trap import trap_page, trap_root

__all__ = ["SimConfig", "SimWeb", "DEFAULT_ROBOTS_MIX", "ROBOTS_SIZE_LIMIT", "Host", "Link",
           "Resource", "RobotsProfile", "base_url"]


# ---------------------------------------------------------------------------
# configuration


@dataclass
class SimConfig:
    """Everything that shapes the synthetic web and its servers.

    Ranges are inclusive ``(low, high)``.  ``robots_mix`` maps a
    :class:`RobotsProfile` kind to a weight (``{"absent": 1}`` = no robots).
    ``faults`` is a list of :class:`larbin_py.sim.faults.Fault`; ``load`` maps
    a host name to ``(base_s, per_request_s)`` (answer time = base +
    per_request * requests in flight on that host) or ``(base_s,
    per_request_s, capacity)`` (a server of ``capacity`` workers: answer
    time = base * max(1, in flight / capacity) + per_request * in flight).
    """

    seed: int = 1
    hosts: int = 20
    pages_per_host: tuple[int, int] = (3, 10)
    body_size: tuple[int, int] = (400, 3000)
    links_per_page: tuple[int, int] = (2, 6)
    cross_host_ratio: float = 0.2
    max_layer: int = 4
    ip_base: str = "127.0.1.1"
    hosts_per_ip: int = 4
    port: int = 0
    dns: bool = False
    dns_port: int = 0
    dns_latency: float = 0.0
    dns_servfail_rate: float = 0.0
    dns_drop_rate: float = 0.0
    extras: bool = True  # subdomains, IDN host, CNAME aliases, dead host
    hostile: bool = False  # evil.sim.test: URLs that try to escape saveDir, see HOSTILE_LINKS
    trap: bool = True
    robots_mix: dict[str, float] | None = None
    crawl_delay: tuple[float, float] = (0.3, 0.5)
    robots_agent: str = "larbin"
    gzip_ratio: float = 0.3
    chunked_ratio: float = 0.2
    p_base: float = 0.1
    p_malformed: float = 0.06
    p_charset: float = 0.1
    p_nonhtml: float = 0.2
    p_redirect: float = 0.08
    p_loop: float = 0.02
    p_dup: float = 0.05
    p_missing: float = 0.05
    p_nofollow: float = 0.1
    p_unfollowable: float = 0.3
    p_frameset: float = 0.03
    p_query: float = 0.08
    faults: list = field(default_factory=list)
    load: dict[str, tuple[float, ...]] = field(default_factory=dict)
    seeds: int | None = None  # number of h{i} roots in sim.seeds (None = all)
    dynamic: bool = False  # js.sim.test: links written by JavaScript (sim.dynamic), its root a seed
    #: Pages shaped like documentation (a generated manual's): the same links and
    #: filler, but in a deep tree -- nested sections, a table of contents as nested
    #: lists, tables, code blocks -- as Sphinx or Javadoc write them.
    doc_pages: bool = False
    scope: bool = False  # sim.scope: sitemaps, noindex and nofollow pages, canonical pairs on each h{i}


DEFAULT_ROBOTS_MIX = {
    "absent": 3.0, "rules": 2.0, "patterns": 1.0, "allow": 1.0, "delay": 0.5,
    "agent": 1.0, "error": 0.3, "timeout": 0.2, "redirect": 0.5, "oversized": 0.3,
    "forbidden": 0.3,
}

#: (raw href on evil.sim.test's root, canonical path it resolves to).  URLs
#: that try to leave the save folder, collide with device names, are too long
#: for a file name, need a file to also be a folder, or carry markup.
_LONG_PATH = "/long/" + "/".join(f"segment{i:04d}" for i in range(900)) + "/end.html"
HOSTILE_LINKS: tuple[tuple[str, str], ...] = (
    ("/..%2f..%2f..%2fetc%2fpasswd", "/..%2F..%2F..%2Fetc%2Fpasswd"),
    ("/a/%2e%2e/%2E%2e/%2e%2e/escape1.html", "/escape1.html"),
    ("/%2e%2e%5c%2e%2e%5cwin.html", "/..%5C..%5Cwin.html"),
    ("/dir\\..\\..\\back.html", "/back.html"),
    ("/.%2e/.%2E/dotdot.html", "/dotdot.html"),
    ("/%2Fetc%2Fpasswd", "/%2Fetc%2Fpasswd"),
    ("/nul%00byte.html", "/nul%00byte.html"),
    ("/con.html", "/con.html"),
    ("/NUL", "/NUL"),
    ("/com1.html", "/com1.html"),
    ("/a:b*c.html", "/a:b*c.html"),
    ("/trailing.", "/trailing."),
    ("/space%20name.html", "/space%20name.html"),
    ("/\u00fcn\u00ef.html", "/%C3%BCn%C3%AF.html"),
    ("/" + "L" * 300 + ".html", "/" + "L" * 300 + ".html"),
    (_LONG_PATH, _LONG_PATH),
    ("/file", "/file"),
    ("/file/child.html", "/file/child.html"),
    ("/q.php?path=../../etc/passwd&x=%2F..%2F", "/q.php?path=../../etc/passwd&x=%2F..%2F"),
    ("/x<script>alert(\"x\")</script>'.html", "/x%3Cscript%3Ealert(%22x%22)%3C/script%3E'.html"),
)

# ---------------------------------------------------------------------------
# filler content

_WORDS = (
    "larbin crawls the synthetic web quickly politely and deterministically "
    "every page has one canonical address links come in many forms robots "
    "rules are obeyed hosts share addresses on loopback the event loop never "
    "blocks pages are parsed links are normalized duplicates are detected"
).split()
_rng0 = random.Random(0)
_TEXT = " ".join(_rng0.choice(_WORDS) for _ in range(20000))
_LATIN = "Café crème, naïve façade, à la française; señor Ångström. "
_CP1252 = "Café “quoted” — dash, 10 € only; naïve façade. "
_SJIS = "日本語のページです。ウェブクローラーのテスト。"


def _filler(rng: random.Random, n: int) -> str:
    start = rng.randrange(0, len(_TEXT) - n - 1) if n < len(_TEXT) - 1 else 0
    return _TEXT[start:start + n]


def _png(seed: int) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes((seed + x + y) & 0xFF for x in range(12)) for y in range(4))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _jpg(seed: int) -> bytes:
    return b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + \
        bytes((seed * 7 + i) & 0xFF for i in range(64)) + b"\xff\xd9"


def _pdf(seed: int) -> bytes:
    return (b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n% sim document "
            + str(seed).encode() + b"\ntrailer << /Root 1 0 R >>\n%%EOF\n")


# ---------------------------------------------------------------------------
# the web


class SimWeb:
    """All hosts of the synthetic web, addressed by canonical host name."""

    def __init__(self, hosts: list[Host], port: int, *, seeds: list[str] | None = None,
                 dead_hosts: tuple[str, ...] = (), config: SimConfig | None = None):
        self.port = port
        self.hosts: dict[str, Host] = {h.name: h for h in hosts}
        self.config = config or SimConfig(extras=False, trap=False)
        self.dead_hosts = dead_hosts
        self.dns_only_cnames: dict[str, str] = {}  # CNAME hops that serve nothing
        self.seeds = seeds if seeds is not None else [h.root(port) for h in hosts if not h.cname]
        self._max_layer = max((r.layer for h in hosts for r in h.resources.values()), default=0)

    # -- lookups ---------------------------------------------------------
    def url(self, host: str, pq: str) -> str:
        return base_url(host, self.port) + pq

    def lookup(self, url: str) -> Resource | None:
        """The resource at a canonical URL (trap pages generated on demand)."""
        from .urls import split_url
        host, _port, pq = split_url(url)
        h = self.hosts.get(host)
        return None if h is None else self.resource(h, pq)

    def resource(self, host: Host, pq: str) -> Resource | None:
        res = host.resources.get(pq)
        if res is None and host.trap:
            res = trap_page(host, self.port, pq)
        return res

    def ips(self) -> list[str]:
        return sorted({h.ip for h in self.hosts.values()}, key=ipaddress.ip_address)

    def dns_records(self) -> dict[str, list[str]]:
        return {h.name: [h.ip] for h in self.hosts.values() if not h.cname}

    def dns_cnames(self) -> dict[str, str]:
        out = {h.name: h.cname for h in self.hosts.values() if h.cname}
        out.update(self.dns_only_cnames)
        return out

    def max_depth(self, depth_by_site: bool = True) -> int:
        """depth_in_site at or above which truth is exact under any crawl order.

        With ``depth_by_site`` it is the deepest layer of any host (trap
        excluded: the trap is exact at every depth).  Without it, paths cross
        hosts, so the bound is ``(deepest layer + 1) * number of hosts``.
        """
        if depth_by_site:
            return self._max_layer
        return (self._max_layer + 1) * len(self.hosts)

    def all_urls(self) -> list[str]:
        """Every canonical URL with a stored resource (trap pages excepted)."""
        return [self.url(h.name, pq) for h in self.hosts.values() for pq in h.resources]

    def page_count(self) -> int:
        return sum(1 for h in self.hosts.values() for r in h.resources.values() if r.is_html)

    # -- generation --------------------------------------------------------
    @classmethod
    def generate(cls, config: SimConfig, port: int) -> "SimWeb":
        """Build the web of ``config`` for a server on ``port``."""
        return _Generator(config, port).build()


def _ip(base: str, index: int) -> str:
    ip = ipaddress.ip_address(base) + index
    if ip not in ipaddress.ip_network("127.0.0.0/8"):
        raise ValueError(f"host IP {ip} leaves 127.0.0.0/8")
    return str(ip)


class _Generator:
    def __init__(self, config: SimConfig, port: int):
        self.c = config
        self.port = port
        self.web: SimWeb | None = None

    def build(self) -> SimWeb:
        c = self.c
        n = max(1, c.hosts)
        hosts: list[Host] = []
        for i in range(n):
            hosts.append(Host(f"h{i}.sim.test", _ip(c.ip_base, i // max(1, c.hosts_per_ip))))
        extra_ip = (n - 1) // max(1, c.hosts_per_ip) + 1
        extras: list[Host] = []
        dead: tuple[str, ...] = ()
        if c.extras:
            h3, h5 = hosts[min(3, n - 1)], hosts[min(5, n - 1)]
            extras = [
                Host("www." + h3.name, h3.ip),
                Host("blog." + h3.name, _ip(c.ip_base, extra_ip)),
                Host("xn--bcher-kva.sim.test", _ip(c.ip_base, extra_ip), display="bücher.sim.test"),
                Host("alias.sim.test", h5.ip, cname=h5.name),
                Host("cdn.sim.test", hosts[min(1, n - 1)].ip, cname="edge.sim.test"),
            ]
            dead = ("dead.sim.test",)
        if c.trap:
            extras.append(Host("trap.sim.test", _ip(c.ip_base, extra_ip + 1), trap=True))
        if c.hostile:
            extras.append(Host("evil.sim.test", _ip(c.ip_base, extra_ip + 2)))
        if c.dynamic:
            from .dynamic import js_host
            extras.append(js_host(self.port, _ip(c.ip_base, extra_ip + 3)))
        all_hosts = hosts + extras
        seeds_n = n if c.seeds is None else min(n, c.seeds)
        seeds = [h.root(self.port) for h in hosts[:seeds_n]]
        if c.dynamic:
            seeds.append(extras[-1].root(self.port))
        web = SimWeb(all_hosts, self.port, seeds=seeds, dead_hosts=dead, config=c)
        if c.extras:
            web.dns_only_cnames = {"edge.sim.test": hosts[min(1, n - 1)].name}
        self.web = web
        targets = [h for h in all_hosts if not h.trap and h.name != "js.sim.test"]
        mix = c.robots_mix or DEFAULT_ROBOTS_MIX
        kinds, weights = zip(*mix.items())
        for idx, h in enumerate(all_hosts):
            rng = random.Random(f"{c.seed}:{h.name}")
            h.gzip = rng.random() < c.gzip_ratio
            h.chunked = rng.random() < c.chunked_ratio
            if h.trap:
                h.resources["/"] = trap_root(h, self.port)
                h.robots = RobotsProfile()
                continue
            if h.name == "js.sim.test":
                continue  # built whole by sim.dynamic
            if h.name == "evil.sim.test":
                self._hostile_pages(h, rng)
                h.robots = RobotsProfile()
                continue
            specials = []
            if idx == 0:
                specials = [h for h in extras if h.name != "js.sim.test"] + hosts[1:4]
            self._host_pages(h, rng, targets, specials)
            kind = rng.choices(kinds, weights)[0]
            if idx == 0 and kind in ("error", "timeout", "agent"):
                kind = "absent"  # h0's root links the special hosts: keep it crawlable
            h.robots = self._robots(h, rng, kind)
            if c.scope and idx < n:
                add_scope(h, self.port, c.seed, hosts)
        web._max_layer = max((r.layer for h in all_hosts for r in h.resources.values()), default=0)
        return web

    # -- pages of one host ---------------------------------------------------
    def _host_pages(self, host: Host, rng: random.Random, targets: list[Host],
                    specials: list[Host]) -> None:
        c = self.c
        npages = rng.randint(*c.pages_per_host)
        paths = ["/"]
        layer = {"/": 0}
        parent = {}
        children: dict[str, list[str]] = {"/": []}
        for i in range(1, npages):
            pq = self._page_path(rng, i)
            if pq in layer:
                continue
            eligible = [p for p in paths if layer[p] < c.max_layer]
            par = rng.choice(eligible)
            paths.append(pq)
            layer[pq] = layer[par] + 1
            parent[pq] = par
            children[pq] = []
            children[par].append(pq)
        by_layer: dict[int, list[str]] = {}
        for p in paths:
            by_layer.setdefault(layer[p], []).append(p)
        for n, pq in enumerate(paths):
            prng = random.Random(f"{c.seed}:{host.name}:{pq}")
            cross = targets if len(targets) > 1 else []
            self._page(host, pq, layer[pq], n, prng, children[pq],
                       by_layer.get(layer[pq] + 1, []), cross, specials if pq == "/" else [])

    def _page_path(self, rng: random.Random, i: int) -> str:
        r = rng.random()
        if r < self.c.p_query:
            return f"/shop/item.php?id={i}" + ("&cat=2" if i % 2 else "")
        templates = (
            "/p{i}.html", "/p{i}.html", "/p{i}.html", "/docs/p{i}.html", "/docs/sub/p{i}.html",
            "/news/{i}/", "/~ann/p{i}.html", "/x%2Fy{i}.html", "/My%20Doc{i}.html",
            "/caf%C3%A9{i}.html", "/a-b_c.d{i}.htm",
        )
        return rng.choice(templates).format(i=i)

    def _page(self, host: Host, pq: str, lay: int, n: int, rng: random.Random,
              children: list[str], next_layer: list[str], cross: list[Host],
              specials: list[Host]) -> None:
        c, web = self.c, self.web
        port = self.port
        page_url = host.root(port)[:-1] + pq
        path = pq.split("?", 1)[0]
        page_dir = path[: path.rfind("/") + 1]
        # charset
        enc, declare = "utf-8", "header"
        if rng.random() < c.p_charset:
            enc, declare = rng.choice((("iso-8859-1", "header"), ("windows-1252", "meta"),
                                       ("shift_jis", "meta"), ("shift_jis", "header")))
        utf8 = enc == "utf-8"
        base, base_dir, base_tag = page_url, page_dir, ""
        if rng.random() < c.p_base:
            base_dir = rng.choice(("/docs/", "/", "/news/x/"))
            base = host.root(port)[:-1] + base_dir
            base_tag = base_dir if rng.random() < 0.5 else base
        w = LinkWriter(port, host, page_url, base, base_dir, utf8, rng)
        links: list[Link] = []
        frameset = bool(children) and pq != "/" and rng.random() < c.p_frameset
        if frameset:  # a frameset page links its children as frames, nothing else
            links = [w.write(host, child, "frame") for child in children]
            html = self._render(host, pq, enc, declare, base_tag, [], links, True, False, 0, rng)
            ctype = "text/html; charset=utf-8" if utf8 else (
                f"text/html; charset={enc}" if declare == "header" else "text/html")
            host.resources[pq] = Resource(200, ctype, html.encode(enc), tuple(links), layer=lay)
            return
        # tree edges + extra forward links
        for child in children:
            kind = rng.choice(("a",) * 12 + ("area", "iframe"))
            links.append(w.write(host, child, kind))
        extra = rng.randint(*c.links_per_page)
        for _ in range(extra):
            r = rng.random()
            if r < c.cross_host_ratio and cross:
                other = rng.choice(cross)
                if other is host:  # never link to oneself as "another host"
                    other = cross[(cross.index(other) + 1) % len(cross)]
                links.append(w.write(other, "/", "a"))
            elif next_layer and r < 0.7:
                links.append(w.write(host, rng.choice(next_layer), "a"))
            elif r < 0.85:
                links.append(w.write(host, "/", "a"))
            else:
                links.append(w.write(host, pq, "a"))  # self link
        for sp in specials:
            links.append(w.write(sp, "/", "a"))
        # special resources hanging off this page (layer + 1)
        res = host.resources
        tag = f"{n}"
        if rng.random() < c.p_nonhtml:
            ext, ctype, maker = rng.choice(((".png", "image/png", _png), (".jpg", "image/jpeg", _jpg)))
            ipq = f"/img/p{tag}{ext}"
            res[ipq] = Resource(200, ctype, maker(n), layer=lay + 1, kind="image")
            links.append(w.write(host, ipq, "img"))
            dpq = f"/files/doc{tag}.pdf"
            res[dpq] = Resource(200, "application/pdf", _pdf(n), layer=lay + 1, kind="pdf")
            links.append(w.write(host, dpq, "a"))
        if rng.random() < c.p_redirect:
            a, b, t = f"/old/r{tag}.html", f"/old/s{tag}.html", f"/moved/r{tag}.html"
            target_body = self._simple_page(host, t, "moved here", rng)
            res[t] = target_body
            target_body.layer = lay + 1
            res[b] = self._redirect(host, b, t, rng, lay + 1)
            res[a] = self._redirect(host, a, b if rng.random() < 0.6 else t, rng, lay + 1)
            links.append(w.write(host, a, "a"))
        if rng.random() < c.p_loop:
            a, b = f"/loop/a{tag}", f"/loop/b{tag}"
            res[a] = self._redirect(host, a, b, rng, lay + 1)
            res[b] = self._redirect(host, b, a, rng, lay + 1)
            links.append(w.write(host, a, "a"))
        if rng.random() < c.p_dup:
            d1, d2, nxt = f"/dup/a{tag}.html", f"/mirror/a{tag}.html", f"/dup/next{tag}.html"
            nres = self._simple_page(host, nxt, "after the duplicate", rng)
            nres.layer = lay + 2
            res[nxt] = nres
            d1url = host.root(port)[:-1] + d1
            dw = LinkWriter(port, host, d1url, d1url, "/dup/", True, rng)
            dlinks = (dw.write(host, "/", "a", absolute=True, plain=True),
                      dw.write(host, nxt, "a", absolute=True, plain=True))
            dres = self._html(host, "duplicate content " + _filler(rng, 200), dlinks, rng)
            dres.layer = lay + 1
            res[d1] = dres
            d2url = host.root(port)[:-1] + d2
            res[d2] = Resource(200, dres.content_type, dres.body,
                               tuple(Link(lk.target, lk.kind, lk.raw, d2url) for lk in dlinks),
                               layer=lay + 1)
            links.append(w.write(host, d1, "a"))
            links.append(w.write(host, d2, "a"))
        if rng.random() < c.p_missing:
            links.append(w.write(host, f"/missing{tag}.html", "a"))
        if rng.random() < c.p_nofollow:
            ppq = f"/private/n{tag}.html"
            pres = self._simple_page(host, ppq, "private", rng)
            pres.layer = lay + 1
            res[ppq] = pres
            links.append(w.write(host, ppq, "a", nofollow=True))
            if children:
                links.append(w.write(host, children[0], "a", nofollow=True))
        if rng.random() < c.p_unfollowable:
            for raw in rng.sample(("mailto:webmaster@" + host.name, "javascript:void(0)",
                                   "data:text/html,<b>hi</b>", "ftp://" + host.name + "/pub/",
                                   "tel:+15550100", "JavaScript:alert(1)"), 2):
                links.append(Link(None, "a", raw, base))
        if self.web.dead_hosts and rng.random() < 0.02:
            links.append(Link(f"http://{self.web.dead_hosts[0]}" + ("" if port == 80 else f":{port}") + "/",
                              "a", f"http://{self.web.dead_hosts[0]}:{port}/", base))
        # head-borne links: one link rel=next / meta refresh, taken from children
        head_links: list[Link] = []
        body_links = links
        if children and rng.random() < 0.1:
            child = rng.choice(children)
            kind = rng.choice(("link", "refresh"))
            lk = w.write(host, child, kind, plain=(kind == "refresh"))
            head_links.append(lk)
        malformed = rng.random() < c.p_malformed
        body_len = rng.randint(*c.body_size)
        html = self._render(host, pq, enc, declare, base_tag, head_links, body_links, frameset,
                            malformed, body_len, rng)
        ctype = "text/html; charset=utf-8" if utf8 else (
            f"text/html; charset={enc}" if declare == "header" else "text/html")
        res[pq] = Resource(200, ctype, html.encode(enc), tuple(head_links + body_links), layer=lay)

    def _render(self, host: Host, pq: str, enc: str, declare: str, base_tag: str,
                head_links: list[Link], links: list[Link], frameset: bool, malformed: bool,
                body_len: int, rng: random.Random) -> str:
        head = ["<!DOCTYPE html>\n<html><head>"]
        if declare == "meta":
            head.append(f'<meta charset="{enc}">')
        head.append(f"<title>{host.name} {escape(pq)}</title>")
        if base_tag:
            head.append(f'<base href="{render_attr(base_tag)}">')
        for lk in head_links:
            if lk.kind == "link":
                head.append(f'<link rel="next" href="{render_attr(lk.raw)}">')
            else:
                head.append(f'<meta http-equiv="refresh" content="0; url={render_attr(lk.raw)}">')
        head.append("</head>\n")
        text = {"utf-8": "Ünïcödé ✓ ", "iso-8859-1": _LATIN, "windows-1252": _CP1252,
                "shift_jis": _SJIS}[enc]
        out = head
        if frameset:
            out.append('<frameset cols="50%,50%">')
            out.extend(f'<frame src="{render_attr(lk.raw)}">' for lk in links)
            out.append(f"<noframes>{escape(text)}</noframes></frameset></html>\n")
            return "".join(out)
        if self.c.doc_pages:
            self._render_doc(out, text, links, malformed, body_len, rng)
            return "".join(out)
        out.append(f"<body><h1>{escape(text)}</h1>\n")
        per = max(1, body_len // (len(links) + 1))
        areas = []
        for lk in links:
            out.append("<p>" + _filler(rng, per // 2) + " ")
            if lk.kind == "area":
                areas.append(lk)
            else:
                out.append(self._anchor(lk, rng))
            out.append(" " + _filler(rng, per // 2) + ("</p>\n" if not malformed else "\n"))
        _page_end(out, areas, malformed, "<p>" + escape(text) + "</p></body></html>\n")
        return "".join(out)

    def _render_doc(self, out: list[str], text: str, links: list[Link], malformed: bool, body_len: int,
                    rng: random.Random) -> None:
        """The body of a documentation-like page (``doc_pages``): a third of the
        links in a table of contents of nested lists, the rest in sections nested
        up to 12 deep (paragraphs with inline markup, definition tables, code
        blocks); the DOM is about 20-30 elements deep, as a manual's."""
        areas = [lk for lk in links if lk.kind == "area"]
        inline = [lk for lk in links if lk.kind != "area"]
        toc_n = len(inline) // 3
        toc, body = inline[:toc_n], inline[toc_n:]
        per = max(1, body_len // (len(links) + 1))
        out.append('<body><div class="document"><div class="documentwrapper"><div class="bodywrapper">'
                   '<div class="body" role="main">\n')
        out.append('<div class="sphinxsidebar" role="navigation"><div class="sphinxsidebarwrapper">'
                   '<h3>Table of contents</h3>\n')
        depth = 0
        for lk in toc:  # nested lists, going down and up as a manual's toctree does
            want = rng.randint(1, 5)
            while depth < want:
                out.append("<ul>")
                depth += 1
            while depth > want:
                out.append("</li></ul>")
                depth -= 1
            out.append('<li class="toctree-l%d">' % depth + self._anchor(lk, rng) + " "
                       + _filler(rng, min(per, 40)) + "</li>\n")
        out.append("</ul>" * depth + "</div></div>\n")
        out.append(f'<div class="section" id="top"><h1>{escape(text)}</h1>\n')
        depth = 1
        for i, lk in enumerate(body):
            want = rng.randint(1, 12)
            if want > depth:
                for _ in range(want - depth):
                    depth += 1
                    out.append(f'<div class="section" id="s{i}-{depth}"><h{min(depth, 6)}>'
                               f'{_filler(rng, 30)}</h{min(depth, 6)}>\n')
            elif want < depth and rng.random() < 0.5:
                out.append("</div>\n" * (depth - want))
                depth = want
            shape = rng.random()
            if shape < 0.6:
                out.append("<p>" + _filler(rng, per // 3) + ' <span class="pre"><code>'
                           + escape(_filler(rng, 20)) + "</code></span> <em>" + _filler(rng, per // 6)
                           + "</em> " + self._anchor(lk, rng) + " " + _filler(rng, per // 3) + "</p>\n")
            elif shape < 0.8:
                out.append('<table class="docutils"><tbody><tr><td><p><strong>' + _filler(rng, 20)
                           + "</strong></p></td><td><p>" + self._anchor(lk, rng) + " "
                           + _filler(rng, max(1, per - 40)) + "</p></td></tr></tbody></table>\n")
            else:
                out.append('<dl class="function"><dt><code class="descname">' + escape(_filler(rng, 20))
                           + "</code></dt><dd><p>" + self._anchor(lk, rng) + "</p>"
                           + '<div class="highlight"><pre><span class="k">' + escape(_filler(rng, per // 2))
                           + "</span></pre></div></dd></dl>\n")
        _page_end(out, areas, malformed,
                  "</div>\n" * depth + "<p>" + escape(text) + "</p></div></div></div></div></body></html>\n")

    @staticmethod
    def _anchor(lk: Link, rng: random.Random) -> str:
        if lk.kind == "img":
            return f'<img src="{render_attr(lk.raw)}" alt="picture">'
        if lk.kind == "iframe":
            return f'<iframe src="{render_attr(lk.raw)}"></iframe>'
        rel = ' rel="nofollow"' if lk.nofollow else ""
        if rng.random() < 0.3 and not lk.nofollow:
            return f"<a href='{render_attr(lk.raw)}' class=l>link</a>"
        return f'<a{rel} href="{render_attr(lk.raw)}">link</a>'

    def _html(self, host: Host, text: str, links: tuple[Link, ...], rng: random.Random) -> Resource:
        body = ["<!DOCTYPE html>\n<html><head><title>", escape(host.name), "</title></head><body><p>",
                escape(text), "</p>"]
        for lk in links:
            body.append(f'<p><a href="{render_attr(lk.raw)}">link</a></p>')
        body.append("</body></html>\n")
        return Resource(200, "text/html; charset=utf-8", "".join(body).encode(), links)

    def _simple_page(self, host: Host, pq: str, text: str, rng: random.Random) -> Resource:
        url = host.root(self.port)[:-1] + pq
        path = pq.split("?")[0]
        w = LinkWriter(self.port, host, url, url, path[: path.rfind("/") + 1], True, rng)
        return self._html(host, f"{text} {_filler(rng, 150)}", (w.write(host, "/", "a"),), rng)

    def _redirect(self, host: Host, pq: str, to_pq: str, rng: random.Random, lay: int) -> Resource:
        status = rng.choice((301, 302, 307))
        url = host.root(self.port)[:-1] + pq
        form = rng.random()
        if form < 0.5:
            loc = url[: -len(pq)] + to_pq
        elif form < 0.8:
            loc = to_pq
        else:
            path = pq.split("?")[0]
            loc = relative(path[: path.rfind("/") + 1], to_pq)
        body = f"<html><body>Moved to <a href=\"{render_attr(loc)}\">here</a></body></html>".encode()
        target = host.root(self.port)[:-1] + to_pq
        return Resource(status, "text/html; charset=utf-8", body,
                        (Link(target, "redirect", loc, url),), location=loc, layer=lay,
                        kind="redirect")

    # -- hostile URLs ------------------------------------------------------------
    def _hostile_pages(self, host: Host, rng: random.Random) -> None:
        """evil.sim.test: a root linking every :data:`HOSTILE_LINKS` href.

        Targets are written by hand from the WHATWG rules (the oracle in
        :mod:`.urls` is ``urljoin``, which does not know backslashes or
        ``%2e`` segments), so the crawler's parser is checked against them.
        """
        root = host.root(self.port)
        links = tuple(Link(root[:-1] + pq, "a", raw, root) for raw, pq in HOSTILE_LINKS)
        res = self._html(host, "hostile links " + _filler(rng, 100), links, rng)
        host.resources["/"] = res
        for _raw, pq in HOSTILE_LINKS:
            if pq in host.resources:
                continue
            page = self._html(host, f"hostile page {pq[:40]} " + _filler(rng, 120),
                              (Link(root, "a", "/", root[:-1] + pq),), rng)
            page.layer = 1
            host.resources[pq] = page

    # -- robots profiles -------------------------------------------------------
    def _robots(self, host: Host, rng: random.Random, kind: str) -> RobotsProfile:
        c = self.c
        pages = sorted(pq for pq, r in host.resources.items() if r.is_html and pq != "/")
        some = rng.choice(pages) if pages else "/nothing.html"
        other = "User-agent: otherbot\nDisallow: /\n\n"
        if kind == "absent":
            return RobotsProfile(kind, 404, b"<html><body>no robots here</body></html>")
        if kind == "error":
            return RobotsProfile(kind, rng.choice((500, 503)), b"server error")
        if kind == "forbidden":  # 4xx other than 404: still "allow all" (RFC 9309)
            return RobotsProfile(kind, rng.choice((401, 403)), b"forbidden")
        if kind == "timeout":
            return RobotsProfile(kind, 0, b"")
        delay = None
        if kind == "rules":
            text = f"{other}User-agent: *\nDisallow: /docs/\nDisallow: {some}\n"
        elif kind == "patterns":
            text = (f"{other}User-agent: *\nDisallow: /*.pdf$\nDisallow: /shop/*?id=\n"
                    "Disallow: /*sub/\nDisallow: /p1.html$\n")
        elif kind == "allow":
            text = ("User-agent: *\nDisallow: /docs/\nAllow: /docs/*.html$\nDisallow: /docs/sub/\n"
                    "Disallow: /\nAllow: /$\nAllow: /p\nAllow: /news/\nAllow: /img/\n")
        elif kind == "delay":
            delay = round(rng.uniform(*c.crawl_delay), 2)
            text = f"User-agent: *\nCrawl-delay: {delay}\nDisallow: /private/\n"
        elif kind == "agent":
            text = (f"User-agent: {c.robots_agent}\nDisallow: /news/\nDisallow: {some}\n\n"
                    "User-agent: *\nDisallow: /\n")
        elif kind == "redirect":
            rules = f"User-agent: *\nDisallow: {some}\n".encode()
            return RobotsProfile(kind, 301, b"moved", "/robots-rules.txt", rules)
        elif kind == "oversized":
            head = b"User-agent: *\nDisallow: /docs/\n"
            line = b"# " + b"padding " * 15 + b"\n"
            pad = line * ((ROBOTS_SIZE_LIMIT - len(head)) // len(line) + 2)
            tail = b"Disallow: /\n"
            return RobotsProfile(kind, 200, head + pad + tail)
        else:
            raise ValueError(f"unknown robots profile {kind!r}")
        return RobotsProfile(kind, 200, text.encode(), crawl_delay=delay)


def _page_end(out: list[str], areas: list, malformed: bool, closing: str) -> None:
    """A page's last parts: its image map (``areas``' links), then the broken tail of a
    ``malformed`` page, or ``closing``."""
    if areas:
        out.append('<map name="m">')
        for lk in areas:
            out.append(f'<area shape="rect" coords="0,0,9,9" href="{render_attr(lk.raw)}" alt="x">')
        out.append("</map>")
    if malformed:
        out.append("<div><b>unclosed <i>mis</b>nested</i> broken &copy entity &#xZZ; "
                   "and &nbsp stray < sign <table><tr><td>cell")
    else:
        out.append(closing)
