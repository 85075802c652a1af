"""Ground truth: what a correct crawl of a :class:`SimWeb` does.

``compute_truth(web, rules, faults)`` walks the web the way Larbin's rules
say a crawler must (see :class:`CrawlRules`) and returns a :class:`Truth`.

Depth (Larbin's): a seed has ``depth_in_site``; a link gets its page's depth
- 1, except, with ``depth_by_site``, a link to *another* host, which starts
again at ``depth_in_site``; a redirect target keeps the redirect's depth; a
URL whose depth is < 0 is not fetched (``tooDeep``).  The truth uses each
URL's *best* (largest) depth.  A crawler keeps the first depth it meets, so
the two agree under any crawl order when ``depth_by_site`` is on and
``depth_in_site >= web.max_depth()`` (layered hosts, see
:mod:`larbin_py.sim.web`), or when ``depth_in_site >=
web.max_depth(depth_by_site=False)`` without it.  The spider trap is exact at
every depth (a line graph): it is crawled up to the depth, never beyond.

Links followed: the tags in ``CrawlRules.follow_kinds`` (``a area frame
iframe link(rel=next) refresh``; ``img`` only with ``get_images``), never
``rel=nofollow`` ones nor non-http schemes.  A meta refresh counts as a link
(depth - 1); as all refresh targets sit one layer down, a crawler that treats
it as a redirect still agrees whenever ``depth_in_site >= web.max_depth()``.

Order in which a URL's fate is decided (the first that applies is its
``expected_reason``): forbiddenExtension, cgi, tooDeep, noDNS,
forbiddenRobots, then the answer (err30X, err40X, err50X, badType, or a
permanent fault's reason: reset, badResponse, timeout, tooBig).  URLs only
met through links a crawler drops (no_external_links, limit_to_domain) get
``outSite``.

robots.txt (RFC 9309): the group of the agent's product token (exact,
case-insensitive) else ``*``; longest pattern wins, Allow on ties; ``*`` and
``$``; only the first 500 KiB count; 4xx -> allow all; 5xx, a timeout or a
broken connection -> disallow all; redirects are followed.

Scope (:mod:`larbin_py.sim.scope`'s pages): with ``sitemaps``, the first
time a host's robots.txt is read (it answered, or 4xx: not 5xx nor
silence) its sitemap files are: those its robots.txt names, else
``/sitemap.xml``; a file robots.txt forbids is ``forbiddenRobots``, a
missing one ``err40X``, a read one ``sitemap``; an index's files are read
down to level 3; the pages a file lists (on its host) are met at depth
``depth_in_site``, through the same rules as links.  With
``respect_noindex`` a page whose meta robots or X-Robots-Tag (for the
agent, or for all) says noindex is ``noindex`` (requested, not saved, its
links followed); an X-Robots-Tag nofollow for the agent stops its links.
With ``follow_canonical`` a page whose canonical names another URL is
``canonicalised`` and its canonical is met at the page's depth, except two
pages naming each other (``canonical_loops``: exactly one of them is
saved, the other ``canonicalised``, whichever the crawl met first).
``url_include``/``url_exclude`` (Python ``re`` here: the sim's patterns
are simple) refuse a URL as ``notIncluded``/``excluded``.

Transient faults are ignored (retries win).  With ``page_no_duplicate``,
pages whose bytes are identical form ``duplicate_groups``: exactly one URL of
each group is saved (whichever the crawler met first), the others end
``duplicate``; those URLs are absent from ``saved``.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field

from .faults import PERMANENT_REASON, FaultPlan
from .urls import split_url
from .model import ROBOTS_SIZE_LIMIT, Host
from .trap import trap_layer
from .web import SimWeb

DEFAULT_FOLLOW = frozenset({"a", "area", "frame", "iframe", "link", "refresh"})


@dataclass
class CrawlRules:
    """The crawler settings the truth depends on (Config names, snake_case).

    ``user_agent`` is the robots.txt product token; the sim's ``agent``
    robots profile names ``SimConfig.robots_agent`` (default ``larbin``), so
    set both alike to exercise agent-specific groups.
    """

    seeds: tuple[str, ...] | list[str] | None = None  # None: the sim's seeds
    depth_in_site: int = 5
    depth_by_site: bool = True
    no_external_links: bool = False
    obey_robots: bool = True
    user_agent: str = "larbin"
    forbidden_extensions: tuple[str, ...] = ()
    get_images: bool = False
    any_type: bool = False
    get_cgi: bool = True
    limit_to_domain: tuple[str, ...] = ()
    page_no_duplicate: bool = False
    follow_kinds: frozenset[str] = DEFAULT_FOLLOW  # tags whose links are followed ("img" via get_images)
    robots_max_redirects: int = 5
    #: The crawl's ``dynamicPages`` rules, ``(pattern, trigger)``: a page they render with the
    #: trigger it needs has its JavaScript links (sim.dynamic) followed too.
    dynamic_pages: tuple[tuple[str, str], ...] = ()
    # Scope (see the module docstring).
    sitemaps: bool = False
    respect_noindex: bool = True
    follow_canonical: bool = False
    url_include: tuple[str, ...] = ()
    url_exclude: tuple[str, ...] = ()


@dataclass
class Truth:
    """What a correct crawl requests, saves and forgets (see module docstring)."""

    must_request: set[str] = field(default_factory=set)
    must_not_request: set[str] = field(default_factory=set)
    saved: dict[str, bytes] = field(default_factory=dict)
    expected_reason: dict[str, str] = field(default_factory=dict)
    robots_hosts: set[str] = field(default_factory=set)
    robots_urls: set[str] = field(default_factory=set)
    crawl_delay: dict[str, float] = field(default_factory=dict)
    depth: dict[str, int] = field(default_factory=dict)
    duplicate_groups: list[frozenset[str]] = field(default_factory=list)
    #: Same-host URLs the rendering of dynamic pages may request (robots.txt allowing);
    #: kept out of must_not_request.
    sub_requests: set[str] = field(default_factory=set)
    #: Dynamic pages (URL -> whether their JavaScript links are found).
    rendered: dict[str, bool] = field(default_factory=dict)
    #: Sitemap files requested and read (each also in must_request, reason ``sitemap``).
    sitemap_files: set[str] = field(default_factory=set)
    #: Pages some sitemap read lists (whatever their fate).
    listed: set[str] = field(default_factory=set)
    #: Pairs of pages whose canonicals name each other: one saved, the other canonicalised.
    canonical_loops: list[frozenset[str]] = field(default_factory=list)


# ---------------------------------------------------------------------------
# robots.txt, the oracle's own small RFC 9309 reader


@dataclass
class Rules:
    """Parsed robots.txt: groups of (agents, rules, crawl_delay)."""

    groups: list[tuple[list[str], list[tuple[bool, str]], float | None]]
    allow_all: bool = False
    disallow_all: bool = False

    @classmethod
    def parse(cls, body: bytes) -> "Rules":
        text = body[:ROBOTS_SIZE_LIMIT].decode("utf-8", "replace")
        groups: list[tuple[list[str], list[tuple[bool, str]], float | None]] = []
        agents: list[str] = []
        rules: list[tuple[bool, str]] = []
        delay: float | None = None
        in_rules = False
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key, value = key.strip().lower(), value.strip()
            if key == "user-agent":
                if in_rules:
                    groups.append((agents, rules, delay))
                    agents, rules, delay, in_rules = [], [], None, False
                agents.append(value.lower())
            elif key in ("allow", "disallow"):
                in_rules = True
                if agents and value:
                    rules.append((key == "allow", value))
            elif key == "crawl-delay":
                in_rules = True
                try:
                    delay = float(value)
                except ValueError:
                    pass
        if agents:
            groups.append((agents, rules, delay))
        return cls(groups)

    def _group(self, agent: str):
        agent = agent.lower()
        mine = [g for g in self.groups if agent in g[0]]
        if not mine:
            mine = [g for g in self.groups if "*" in g[0]]
        rules = [r for g in mine for r in g[1]]
        delays = [g[2] for g in mine if g[2] is not None]
        return rules, (delays[0] if delays else None)

    def allowed(self, agent: str, path_query: str) -> bool:
        if self.allow_all or path_query == "/robots.txt":
            return True
        if self.disallow_all:
            return False
        best_len, best_allow = -1, True
        for allow, pattern in self._group(agent)[0]:
            if _match(pattern, path_query):
                n = len(pattern)
                if n > best_len or (n == best_len and allow):
                    best_len, best_allow = n, allow
        return best_allow

    def crawl_delay(self, agent: str) -> float | None:
        return None if (self.allow_all or self.disallow_all) else self._group(agent)[1]


_PATTERNS: dict[str, re.Pattern] = {}


def _match(pattern: str, path: str) -> bool:
    rx = _PATTERNS.get(pattern)
    if rx is None:
        anchored = pattern.endswith("$")
        body = pattern[:-1] if anchored else pattern
        rx = re.compile("".join(".*" if ch == "*" else re.escape(ch) for ch in body)
                        + ("$" if anchored else ""), re.S)
        _PATTERNS[pattern] = rx
    return rx.match(path) is not None


ALLOW_ALL = Rules([], allow_all=True)
DISALLOW_ALL = Rules([], disallow_all=True)


def robots_rules(web: SimWeb, host: Host, faults: FaultPlan | None) -> Rules:
    """The rules a correct crawler ends up with for ``host``."""
    prof = host.robots
    robots_url = web.url(host.name, "/robots.txt")
    if faults:
        f = faults.permanent(robots_url, host.name, True)
        if f is not None:
            # 4xx: no restriction; a body over the size cap: its first
            # 500 KiB (the sim's huge body holds no rules); 429 and 5xx,
            # like no answer: unavailable, so disallow all (RFC 9309 2.3.1.4).
            if f.kind in ("404", "410", "huge"):
                return ALLOW_ALL
            if f.kind != "drip":
                return DISALLOW_ALL
    if prof.kind in ("error", "timeout"):
        return DISALLOW_ALL
    if prof.kind in ("absent", "forbidden"):  # any 4xx
        return ALLOW_ALL
    return Rules.parse(prof.effective_body)


# ---------------------------------------------------------------------------
# the walk


def _ext_forbidden(pq: str, exts: tuple[str, ...]) -> bool:
    path = pq.split("?", 1)[0].lower()
    return any(path.endswith(e.lower()) for e in exts)


def _says(value: str, agent: str, word: str) -> bool:
    """Whether an X-Robots-Tag value (lower case) says ``word`` to ``agent``."""
    applies = True
    for part in value.split(","):
        name, colon, rest = part.partition(":")
        name = name.strip()
        if colon and name not in ("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"):
            applies = name == agent.lower()
            name = rest.strip()
        if applies and (name == word or (name == "none" and word in ("noindex", "nofollow"))):
            return True
    return False


def _noindex(res, agent: str) -> bool:
    meta = res.robots_meta.lower()
    return "noindex" in meta or "none" in meta or _says(res.header_robots, agent, "noindex")


def _pattern_refused(url: str, rules: CrawlRules) -> str | None:
    if rules.url_include and not any(re.search(p, url) for p in rules.url_include):
        return "notIncluded"
    if any(re.search(p, url) for p in rules.url_exclude):
        return "excluded"
    return None


def compute_truth(web: SimWeb, rules: CrawlRules, faults: FaultPlan | None = None) -> Truth:
    """Ground truth of a crawl of ``web`` under ``rules`` (see module docstring)."""
    D = rules.depth_in_site
    seeds = list(rules.seeds) if rules.seeds is not None else list(web.seeds)
    follow = set(rules.follow_kinds) | ({"img"} if rules.get_images else set())
    follow.add("redirect")
    truth = Truth()
    best: dict[str, int] = {}
    dropped: dict[str, str] = {}  # URLs met only through dropped links
    robots_cache: dict[str, Rules] = {}
    heap: list[tuple[int, str]] = []

    def push(url: str, d: int) -> None:
        if d > best.get(url, -(1 << 30)):
            best[url] = d
            heapq.heappush(heap, (-d, url))

    for s in seeds:
        push(s, D)

    def host_rules(host: Host) -> Rules:
        r = robots_cache.get(host.name)
        if r is None:
            r = robots_cache[host.name] = robots_rules(web, host, faults)
            if rules.sitemaps and rules.obey_robots and host.robots.kind not in ("error", "timeout"):
                discover(host, r)
        return r

    sitemap_seen: set[str] = set()

    def discover(host: Host, r: Rules) -> None:
        """A host's robots.txt is read: its sitemap files, and what they list."""
        named = [line.split(":", 1)[1].strip() for line in
                 host.robots.effective_body.decode("utf-8", "replace").splitlines()
                 if line.lower().startswith("sitemap:")] if host.robots.kind not in ("absent", "forbidden") else []
        files = [(u, 0) for u in named] or [(web.url(host.name, "/sitemap.xml"), 0)]
        while files:
            furl, level = files.pop()
            if furl in sitemap_seen:
                continue
            sitemap_seen.add(furl)
            fhost_name, _p, fpq = split_url(furl)
            fhost = web.hosts.get(fhost_name)
            if fhost is None:
                truth.expected_reason[furl] = "noDNS"
                continue
            if not robots_cache.setdefault(fhost_name, robots_rules(web, fhost, faults)).allowed(
                    rules.user_agent, fpq):
                truth.expected_reason[furl] = "forbiddenRobots"
                continue
            truth.must_request.add(furl)
            res = web.resource(fhost, fpq)
            if res is None or res.status >= 400:
                truth.expected_reason[furl] = "err40X"
                continue
            truth.expected_reason[furl] = "sitemap"
            truth.sitemap_files.add(furl)
            for pq in res.sitemap_urls:
                page = web.url(fhost_name, pq)
                truth.listed.add(page)
                push(page, D)
            if level + 1 <= 3:
                files.extend((web.url(fhost_name, pq), level + 1) for pq in res.sitemap_files)

    while heap:
        negd, url = heapq.heappop(heap)
        d = -negd
        if d < best[url]:
            continue
        hostname, _port, pq = split_url(url)
        host = web.hosts.get(hostname)
        if _ext_forbidden(pq, rules.forbidden_extensions) or ("?" in pq and not rules.get_cgi):
            continue
        if d < 0 or host is None or _pattern_refused(url, rules):
            continue
        if rules.obey_robots and not host_rules(host).allowed(rules.user_agent, pq):
            continue
        res = web.resource(host, pq)
        if res is None or (res.status != 200 and res.kind != "redirect"):
            continue
        if faults and faults.permanent(url, hostname) is not None:
            if PERMANENT_REASON[faults.permanent(url, hostname).kind] is not None:
                continue
        if res.kind == "redirect":
            for lk in res.links:
                push(lk.target, d)
            continue
        if not res.is_html:
            continue
        links = res.links
        if _says(res.header_robots, rules.user_agent, "nofollow"):
            links = ()
        canonical = res.canonical if rules.follow_canonical and res.canonical not in (None, url) else None
        if canonical is not None and not (rules.respect_noindex and _noindex(res, rules.user_agent)):
            back = web.lookup(canonical)
            if back is None or back.canonical != url:  # a loop keeps both requested, one saved
                push(canonical, d)
        trigger = _dynamic_trigger(rules.dynamic_pages, url)
        if trigger is not None:
            found = res.js_needs == "none" or res.js_needs == trigger
            if res.js_links or res.js_fetches:
                truth.rendered[url] = found
            if found:
                links = links + res.js_links
            for path in res.js_fetches:
                if not rules.obey_robots or host_rules(host).allowed(rules.user_agent, path):
                    truth.sub_requests.add(web.url(hostname, path))
        for lk in links:
            if lk.target is None or lk.nofollow or lk.kind not in follow:
                continue
            thost = split_url(lk.target)[0]
            external = thost != hostname
            if external and rules.no_external_links:
                dropped.setdefault(lk.target, "outSite")
                continue
            if rules.limit_to_domain and not any(
                    thost == dom.lstrip(".") or thost.endswith("." + dom.lstrip("."))
                    for dom in rules.limit_to_domain):
                dropped.setdefault(lk.target, "outSite")
                continue
            push(lk.target, D if (external and rules.depth_by_site) else d - 1)

    # second pass: each URL's fate at its best depth
    for url, d in best.items():
        truth.depth[url] = d
        hostname, _port, pq = split_url(url)
        host = web.hosts.get(hostname)
        if _ext_forbidden(pq, rules.forbidden_extensions):
            truth.expected_reason[url] = "forbiddenExtension"
            continue
        if "?" in pq and not rules.get_cgi:
            truth.expected_reason[url] = "cgi"
            continue
        refused = _pattern_refused(url, rules)
        if refused is not None:
            truth.expected_reason[url] = refused
            continue
        if d < 0:
            truth.expected_reason[url] = "tooDeep"
            continue
        if host is None:
            truth.expected_reason[url] = "noDNS"
            continue
        if rules.obey_robots:
            truth.robots_hosts.add(hostname)
            truth.robots_urls.add(web.url(hostname, "/robots.txt"))
            if host.robots.kind == "redirect":
                truth.robots_urls.add(web.url(hostname, host.robots.target))
            r = host_rules(host)
            delay = r.crawl_delay(rules.user_agent)
            if delay is not None:
                truth.crawl_delay[hostname] = delay
            if not r.allowed(rules.user_agent, pq):
                truth.expected_reason[url] = "forbiddenRobots"
                continue
        truth.must_request.add(url)
        fault = faults.permanent(url, hostname) if faults else None
        if fault is not None and PERMANENT_REASON[fault.kind] is not None:
            truth.expected_reason[url] = PERMANENT_REASON[fault.kind]
            continue
        res = web.resource(host, pq)
        if res is None or res.status >= 400:
            status = 404 if res is None else res.status
            truth.expected_reason[url] = "err40X" if status < 500 else "err50X"
        elif res.status != 200:
            truth.expected_reason[url] = "err30X"
        elif res.is_html and rules.respect_noindex and _noindex(res, rules.user_agent):
            truth.expected_reason[url] = "noindex"
        elif res.is_html and rules.follow_canonical and res.canonical not in (None, url):
            back = web.lookup(res.canonical)
            if back is not None and back.canonical == url:
                pair = frozenset((url, res.canonical))
                if pair not in truth.canonical_loops:
                    truth.canonical_loops.append(pair)
            else:
                truth.expected_reason[url] = "canonicalised"
        elif res.is_html:
            truth.saved[url] = res.body
        elif rules.any_type or (rules.get_images and res.content_type.startswith("image/")):
            truth.saved[url] = res.body
        else:
            truth.expected_reason[url] = "badType"

    for url, why in dropped.items():
        if url not in best:
            truth.expected_reason[url] = why

    if rules.page_no_duplicate:
        groups: dict[bytes, list[str]] = {}
        for url, body in truth.saved.items():
            groups.setdefault(body, []).append(url)
        for urls in groups.values():
            if len(urls) > 1:
                truth.duplicate_groups.append(frozenset(urls))
                for u in urls:
                    del truth.saved[u]

    known = set(web.all_urls()) | set(best) | set(dropped)
    for host in web.hosts.values():
        if host.trap:
            known |= set(_trap_urls(web, host, D + 2))
    truth.must_not_request = known - truth.must_request - truth.sub_requests
    return truth


def _dynamic_trigger(rules: tuple[tuple[str, str], ...], url: str) -> str | None:
    """The trigger of the first ``dynamicPages`` rule matching ``url`` (prefix or ``re:``), or None."""
    for pattern, trigger in rules:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], url):
                return trigger
        elif url.startswith(pattern):
            return trigger
    return None


def _trap_urls(web: SimWeb, host: Host, max_layer: int) -> list[str]:
    """Trap URLs up to ``max_layer`` hops from its ``/``."""
    out = [web.url(host.name, "/")]
    y0, m0 = 2026, 11
    k0 = y0 * 12 + m0 - 1
    for off in range(-(max_layer - 1), max_layer):
        k = k0 + off
        y, m = k // 12, k % 12 + 1
        pq = f"/cal/{y}/{m:02d}/"
        if trap_layer(pq) is not None and trap_layer(pq) <= max_layer:
            out.append(web.url(host.name, pq))
    return out
